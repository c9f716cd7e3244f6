"""rigbench's own Gemma 4 port to JAX, served behind the rig contract."""
