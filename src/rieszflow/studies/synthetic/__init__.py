"""Paper 000's synthetic kernel-learning benchmark (App. F.1) as a sweep (see :mod:`.study`)."""
