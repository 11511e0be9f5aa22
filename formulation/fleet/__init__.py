"""Several sites planned together: each site's deployments, cap, grid and inventories as
in a site schedule, and demand of origin regions that the sites may share
(docs/fleet.md)."""
