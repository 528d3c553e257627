"""The dashboard: runs list, run page, overview, the nightly benchmark's trends, and their
live updates (server-sent events).

Pages are rendered on the server by Jinja with autoescaping on; the browser script
only swaps in freshly rendered regions when an event arrives and posts forms to the
JSON API. Dashboard pages are queries: with API keys configured they need a key,
which a browser presents once on the login page and then carries in an HttpOnly,
SameSite=Strict cookie that `DashboardGate` turns into the `Authorization` header
the API guard checks.
"""

from faultfinder.server.api.dashboard.gate import DashboardGate
from faultfinder.server.api.dashboard.pages import DashboardController
from faultfinder.server.api.dashboard.render import dashboard_static_files, dashboard_templates

__all__ = ["DashboardController", "DashboardGate", "dashboard_static_files", "dashboard_templates"]
