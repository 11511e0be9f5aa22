"""The use-case table (``table``): every operation that computes, one row each, and the
work each row runs (``runs``)."""
