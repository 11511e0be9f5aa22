"""Questions asked of a site beside its schedule: a demand-response event's cost
(:mod:`.dr`), the site's flexibility curve, served demand against the cap
(:mod:`.flex`), and the GPU settings that meet a cap at once on the running instances
(:mod:`.shed`)."""
