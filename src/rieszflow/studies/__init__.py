"""rieszflow.studies: the main job and every study, one CLI subcommand each (see studies.cli)."""
