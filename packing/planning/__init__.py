"""Plans over lengths: ``plan`` turns a recipe and lengths into a ``PackingPlan`` (pieces and stats; select,
permute, shuffle), and the compute cost of a plan. Internal: the public names are in ``packing``.
"""
