"""Questions asked of a site beside its schedule: a demand-response event's cost
(:mod:`.dr`) and the site's flexibility curve, served demand against the cap
(:mod:`.flex`)."""
