"""Registered sites: registration and updates (``registry``), OpenADR events
(``openadr``), plans (``plans``), replica targets (``targets``), the shed (``shed``) and
the re-plan at each period boundary (``replan``), with the sites API's schemas
(``schemas``)."""
