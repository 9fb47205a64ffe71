"""Client quotas, sans-I/O: which quota applies to a (user, client id), the sampled rate
it is measured with, and the throttle time a violation costs (Kafka's ClientQuotaManager).

Quota entities (Kafka's ClientQuotaEntity) are sets of (entity type, name) pairs, a name of
None meaning the type's default: ``user``, ``client-id``, both, or ``ip`` alone. They are
held as `QuotaEntity`, the pairs sorted by type. Per quota key (``producer_byte_rate``,
``consumer_byte_rate``, ``request_percentage``) Kafka's precedence, most specific first::

    /config/users/<user>/clients/<client-id>
    /config/users/<user>/clients/<default>
    /config/users/<user>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>
    /config/users/<default>
    /config/clients/<client-id>
    /config/clients/<default>

As in Kafka's DefaultQuotaCallback, the first entity of that list holding the key decides
the *metric tags* (user, client id; "" for a level it does not name) of the sensor, so
that e.g. a ``users/alice`` quota is shared by all of alice's client ids, and
``quota_limit`` finds the bound for those tags. No entity: no quota (unlimited).

Rates (Kafka's ``Rate`` over ``SampledTotal``): ``quota.window.num`` samples (11) of
``quota.window.size.seconds`` (1 s) plus one overlapping placeholder; a sample is
complete after one window and the next record starts a new one; a sample whose last event
is ``samples * window`` old is reset; the rate is the sum over the samples divided by the
elapsed time since the oldest sample's start, taken as at least ``samples - 1`` full
windows ("N-1 complete windows plus whatever fraction of the final window is complete").

Connections (KIP-612, ``connection_creation_rate`` of an ``ip`` entity or the default ip
entity): each new connection from an address is recorded as 1; over the rate it is taken
back and the connection refused for the throttle time (bounded by one window).

Throttle (Kafka's QuotaUtils.throttleTime), after recording the value: when the measured
rate is above the bound, ``round((rate - bound) / bound * window_ms)``, the time after
which the rate over the window is back at the bound. Request-time quotas bound it by one
window (ClientRequestQuotaManager: ``boundedThrottleTime``).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: Keys a user / client-id entity may carry, with Kafka's QuotaConfig types ("long":
#: integral values only, "double": any positive value).
USER_CLIENT_KEYS: Mapping[str, str] = MappingProxyType(
    {
        PRODUCER_BYTE_RATE: "long",
        CONSUMER_BYTE_RATE: "long",
        REQUEST_PERCENTAGE: "double",
        CONTROLLER_MUTATION_RATE: "double",
    }
)
#: Keys an ip entity may carry.
IP_KEYS: Mapping[str, str] = MappingProxyType({CONNECTION_CREATION_RATE: "int"})

#: (entity type, name or None for the default), sorted by type
QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(pairs: Mapping[str, str | None]) -> QuotaEntity:
    return tuple(sorted(pairs.items()))


#: Sensors kept per quota manager; one whose samples are all obsolete is equivalent to a
#: new one, so those go first when the bound is reached (Kafka expires a sensor after an
#: hour of inactivity).
QUOTA_SENSORS_MAX = 100_000
#: Kafka's defaults: quota.window.num, quota.window.size.seconds
QUOTA_WINDOW_NUM = 11
QUOTA_WINDOW_SIZE_SECONDS = 1


@dataclass(frozen=True, slots=True)
class QuotaWindows:
    samples: int = QUOTA_WINDOW_NUM
    window_ms: int = QUOTA_WINDOW_SIZE_SECONDS * 1000

    def __post_init__(self) -> None:
        if self.samples < 1 or self.window_ms < 1:
            raise ValueError("quota.window.num and quota.window.size.seconds must be >= 1")


class _Sample:
    __slots__ = ("event_count", "last_event_ms", "start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms


class RateSensor:
    """Kafka's ``Rate`` (SampledTotal, seconds): see the module docstring."""

    __slots__ = ("_current", "_samples", "windows")

    def __init__(self, windows: QuotaWindows) -> None:
        self.windows = windows
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.windows.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        # one slot more than the samples: the oldest may overlap the window's start
        self._current = (self._current + 1) % (self.windows.samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.windows.samples * self.windows.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_ms:
                sample.reset(now_ms)

    def _window_after_purge(self, now_ms: int) -> int:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        oldest = min(s.start_ms for s in self._samples)
        elapsed = now_ms - oldest
        full = elapsed // self.windows.window_ms
        if full < self.windows.samples - 1:
            elapsed += (self.windows.samples - 1 - full) * self.windows.window_ms
        return max(elapsed, 1)

    def window_size_ms(self, now_ms: int) -> int:
        """Kafka's Rate.windowSize: the elapsed time the rate is taken over."""
        self._purge(now_ms)
        return self._window_after_purge(now_ms)

    def measure(self, now_ms: int) -> tuple[float, int]:
        """(rate per second, the window it is taken over in ms), one purge for both."""
        self._purge(now_ms)
        window_ms = self._window_after_purge(now_ms)
        return sum(s.value for s in self._samples) / (window_ms / 1000.0), window_ms

    def rate(self, now_ms: int) -> float:
        """Per second, over `window_size_ms`."""
        return self.measure(now_ms)[0]

    def idle(self, now_ms: int) -> bool:
        """Every sample obsolete or reset: nothing recorded counts any more."""
        expire_ms = self.windows.samples * self.windows.window_ms
        return all(
            s.event_count == 0 or now_ms - s.last_event_ms >= expire_ms for s in self._samples
        )


def java_round(x: float) -> int:
    """Java's Math.round (half up), not Python's half-to-even."""
    return math.floor(x + 0.5)


def throttle_time_ms(rate: float, bound: float, window_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: how long until the rate is back at the bound."""
    difference = rate - bound
    if difference <= 0:
        return 0
    return java_round(difference / bound * window_ms)


@dataclass(frozen=True, slots=True)
class QuotaBook:
    """The configured quotas of one key (e.g. ``producer_byte_rate``) by entity."""

    limits: Mapping[QuotaEntity, float] = field(default_factory=lambda: MappingProxyType({}))
    #: (user, client id) -> (metric tags, limit): the book never changes, so each client's
    #: resolution is kept (bounded: cleared when full)
    _resolved: dict[tuple[str, str], tuple[tuple[str, str], float | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @staticmethod
    def of(key: str, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> QuotaBook:
        return QuotaBook(
            MappingProxyType(
                {e: v[key] for e, v in quotas.items() if key in v and _usable(e, v[key])}
            )
        )

    @property
    def enabled(self) -> bool:
        return bool(self.limits)

    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        """(`metric_tags`, `limit` of them) of a client."""
        key = (user, client_id)
        found = self._resolved.get(key)
        if found is None:
            if len(self._resolved) >= QUOTA_SENSORS_MAX:
                self._resolved.clear()
            tags = self.metric_tags(user, client_id)
            found = self._resolved[key] = (tags, self.limit(tags))
        return found

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """Kafka's DefaultQuotaCallback.quotaMetricTags: (user tag, client-id tag)."""
        has = self.limits.__contains__
        if has(_uc(user, client_id)) or has(_uc(user, None)):
            return user, client_id  # 1, 2
        if has(_u(user)):
            return user, ""  # 3
        if has(_uc(None, client_id)) or has(_uc(None, None)):
            return user, client_id  # 4, 5
        if has(_u(None)):
            return user, ""  # 6
        return "", client_id  # 7, 8 (or no quota at all)

    def limit(self, tags: tuple[str, str]) -> float | None:
        """Kafka's DefaultQuotaCallback.quotaLimit for metric tags."""
        user, client_id = tags
        get = self.limits.get
        if user and client_id:
            for entity in (
                _uc(user, client_id),
                _uc(user, None),
                _uc(None, client_id),
                _uc(None, None),
            ):
                if (value := get(entity)) is not None:
                    return value
            return None
        if user:
            found = get(_u(user))
            return found if found is not None else get(_u(None))
        if client_id:
            found = get(_c(client_id))
            return found if found is not None else get(_c(None))
        return None


def _usable(entity: QuotaEntity, value: float) -> bool:
    # a NaN quota (in a log from before the controller refused it) is no quota, as in
    # Kafka, whose throttle for it is Math.round(NaN) = 0
    return not math.isnan(value) and all(t in (USER, CLIENT_ID) for t, _ in entity)


def _uc(user: str | None, client_id: str | None) -> QuotaEntity:
    return ((CLIENT_ID, client_id), (USER, user))


def _u(user: str | None) -> QuotaEntity:
    return ((USER, user),)


def _c(client_id: str | None) -> QuotaEntity:
    return ((CLIENT_ID, client_id),)


class ClientQuotaManager:
    """Sensors of one quota key by metric tags: record a value, learn the throttle time.

    ``throttle_max_ms``: the request-time manager bounds a throttle by one window."""

    def __init__(
        self,
        windows: QuotaWindows | None = None,
        *,
        throttle_max_ms: int | None = None,
        sensors_max: int = QUOTA_SENSORS_MAX,
    ) -> None:
        self.windows = windows or QuotaWindows()
        self.throttle_max_ms = throttle_max_ms
        self.sensors_max = sensors_max
        self._sensors: dict[tuple[str, str], RateSensor] = {}

    def sensor(self, tags: tuple[str, str], now_ms: int) -> RateSensor:
        sensor = self._sensors.get(tags)
        if sensor is None:
            if len(self._sensors) >= self.sensors_max:
                self._evict(now_ms)
            sensor = self._sensors[tags] = RateSensor(self.windows)
        return sensor

    def _evict(self, now_ms: int) -> None:
        for tags in [t for t, s in self._sensors.items() if s.idle(now_ms)]:
            del self._sensors[tags]
        while len(self._sensors) >= self.sensors_max:
            del self._sensors[next(iter(self._sensors))]  # the longest-known one

    def record(self, book: QuotaBook, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` and return the throttle time (0: within the quota)."""
        if not book.enabled:
            return 0
        tags, bound = book.resolve(user, client_id)
        if bound is None:
            return 0
        sensor = self.sensor(tags, now_ms)
        sensor.record(value, now_ms)
        rate, window_ms = sensor.measure(now_ms)
        if rate <= bound:
            return 0
        throttle = throttle_time_ms(rate, bound, window_ms)
        if self.throttle_max_ms is not None:
            throttle = min(throttle, self.throttle_max_ms)
        return throttle

    def unrecord(
        self, book: QuotaBook, user: str, client_id: str, value: float, now_ms: int
    ) -> None:
        """Take back a recorded value (a throttled fetch answers no data)."""
        if book.enabled:
            tags, bound = book.resolve(user, client_id)
            if bound is not None:
                self.sensor(tags, now_ms).record(-value, now_ms)

    def max_value_in_window(self, book: QuotaBook, user: str, client_id: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: what one window of ``samples - 1`` windows
        may carry (bounds a fetch's bytes); None without a quota."""
        if not book.enabled:
            return None
        bound = book.resolve(user, client_id)[1]
        if bound is None:
            return None
        return bound * (self.windows.samples - 1) * self.windows.window_ms / 1000.0

    @property
    def sensor_count(self) -> int:
        return len(self._sensors)


def canonical_ip(address: str) -> str:
    """One spelling per address (an IPv4-mapped IPv6 address as its IPv4 form)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


@dataclass(frozen=True, slots=True)
class IpQuotaBook:
    """``connection_creation_rate`` by address (Kafka's ConnectionQuotas.connectionRateForIp:
    the address's own entity, else the default ip entity, else unlimited)."""

    rates: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    default: float | None = None

    @staticmethod
    def of(quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> IpQuotaBook:
        rates: dict[str, float] = {}
        default = None
        for entity, values in quotas.items():
            rate = values.get(CONNECTION_CREATION_RATE)
            if rate is None or math.isnan(rate) or len(entity) != 1 or entity[0][0] != IP:
                continue
            name = entity[0][1]
            if name is None:
                default = rate
            else:
                rates[canonical_ip(name)] = rate
        return IpQuotaBook(MappingProxyType(rates), default)

    @property
    def enabled(self) -> bool:
        return bool(self.rates) or self.default is not None

    def limit(self, address: str) -> float | None:
        return self.rates.get(canonical_ip(address), self.default)


class ConnectionRateQuotas:
    """Kafka's per-address connection creation rate (KIP-612): a new connection is
    recorded; over the rate it is taken back and refused for the throttle time, bounded
    by one window (ConnectionQuotas.recordIpConnectionMaybeThrottle)."""

    def __init__(self, windows: QuotaWindows | None = None, sensors_max: int = QUOTA_SENSORS_MAX):
        self._manager = ClientQuotaManager(windows, sensors_max=sensors_max)
        self.windows = self._manager.windows

    def record(self, book: IpQuotaBook, address: str, now_ms: int) -> int:
        limit = book.limit(address) if book.enabled else None
        if limit is None:
            return 0
        ip = canonical_ip(address)
        sensor = self._manager.sensor((ip, ""), now_ms)
        sensor.record(1.0, now_ms)
        rate = sensor.rate(now_ms)
        if rate <= limit:
            return 0
        sensor.record(-1.0, now_ms)  # not accepted: not counted
        throttle = throttle_time_ms(rate, limit, sensor.window_size_ms(now_ms))
        return min(throttle, self.windows.window_ms)
