"""How lengths are laid out in blocks: the strategy registry, the compiled loops, overflow, lower bounds,
certificates, the proven optimum, statistics and explanations. Works on lengths only. Internal: the public names are
in ``packing`` and ``packing.optimal``.
"""
