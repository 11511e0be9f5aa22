"""Fleets that persist (``/v1/fleets``, docs/fleet.md section 6): registered sites planned
together, with the demand of origin regions routed among them. A member site keeps its
own OpenADR events and forecasts (``/v1/sites/{id}/events``); the fleet's plan reads
every member as it is when planned."""
