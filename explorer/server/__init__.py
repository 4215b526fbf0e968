"""What one server process shares between sessions: the cache, the worker processes, the warm-up, the
lifespan. Importing a module starts nothing; the warm-up's ``prepare`` starts the threads and workers."""
