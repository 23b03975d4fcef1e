"""The Ray side: starting Ray, a slot's engines, trainer ranks and judge (infra, placement),
cluster submission through the Ray Jobs API, and the dry-run's placement plan."""
