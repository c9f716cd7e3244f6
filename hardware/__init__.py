"""What the machines are: the instance types rigbench knows and their GPUs' compute capability.

The lowest layer: `rigs/` (which GPU code an install must carry) and `functions/` (quota,
price, AMI, dtype, bake builders) both read it; it imports neither.
"""
