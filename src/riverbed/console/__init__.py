"""The web console: ``riverbed console --bootstrap-server HOST:PORT``.

An aiohttp application that connects to any Kafka-compatible cluster as an admin client
(confluent-kafka, configured by ``--command-config`` as the CLI is) and serves
server-rendered pages: the cluster overview, topics, a message browser with server-side
filters and a live tail, consumer groups with lag and offset resets, transactions, ACLs
and SCRAM users. Its JavaScript and CSS (htmx, uPlot) are vendored under ``static/``
with their licences; nothing is fetched from a CDN and no Node runs.

Modules: ``admin`` (the blocking admin-client adapter, run off the event loop),
``browse`` (bounded scans, filters, decoding), ``tail`` (live tail over server-sent
events), ``groups`` (lag and offset resets), ``app`` (the aiohttp application, limits
and error pages) and one ``views_*`` module per page.
"""
