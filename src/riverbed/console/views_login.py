"""Sign-in and sign-out pages (``riverbed console --login``; see `riverbed.console.login`).

``next`` (where to go after signing in) is followed only when it is a path on this
console, so a link elsewhere cannot use the sign-in form as an open redirect.
"""

from __future__ import annotations

from aiohttp import web

from riverbed.console.admin import ConsoleError
from riverbed.console.app import Routes, console_of, form_of
from riverbed.console.login import COOKIE, SESSION_IDLE_S, sign_in


def add_routes(router: Routes) -> None:
    router.add_get("/login", login_form)
    router.add_post("/login", login)
    router.add_post("/logout", logout)


def _next(raw: str) -> str:
    return raw if raw.startswith("/") and not raw.startswith("//") and "\\" not in raw else "/"


async def login_form(request: web.Request) -> web.Response:
    console = console_of(request)
    if not console.login:
        raise ConsoleError(404, "this console has no sign-in (start it with --login)")
    return console.render(
        request,
        "login.html",
        page="login",
        next=_next(request.query.get("next", "/")),
        failed=None,
    )


async def login(request: web.Request) -> web.Response:
    console = console_of(request)
    if not console.login:
        raise ConsoleError(404, "this console has no sign-in (start it with --login)")
    form = await form_of(request)
    user, target = form.get("username", ""), _next(form.get("next", "/"))
    assert console.base_conf is not None
    try:
        admin = await console.call(sign_in, console.base_conf, user, form.get("password", ""))
    except ConsoleError as exc:
        return console.render(
            request,
            "login.html",
            status=exc.status,
            page="login",
            next=target,
            failed=exc.message,
        )
    token, evicted = console.sessions.add(user, admin)
    for old in evicted:
        old.close()
    response = web.HTTPSeeOther(target)
    response.set_cookie(
        COOKIE, token, httponly=True, samesite="Strict", secure=console.tls, path="/",
        max_age=int(SESSION_IDLE_S),
    )  # fmt: skip
    raise response


async def logout(request: web.Request) -> web.Response:
    console = console_of(request)
    admin = console.sessions.remove(request.cookies.get(COOKIE))
    if admin is not None:
        await console.call(admin.close)
    response = web.HTTPSeeOther("/login" if console.login else "/")
    response.del_cookie(COOKIE, path="/")
    raise response
