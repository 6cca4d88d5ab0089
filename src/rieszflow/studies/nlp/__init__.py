"""Paper 000's NLP tables (Tables 1, 2, 6, 8) as a sweep of main-job runs (see :mod:`.study`)."""
