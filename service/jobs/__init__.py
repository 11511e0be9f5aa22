"""Running the use cases as jobs: in this process's solver pool (``runner``) or in
``pdwatt worker`` processes over Redis (``queue``), and the jobs API's schemas
(``schemas``)."""
