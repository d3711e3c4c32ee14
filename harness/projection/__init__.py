"""Figures of their own kind, computed from a model of the work and never measured: the
projection records (projection), the TPU ahead-of-time plan (tpu_plan), the GPU side
(gpu_projection), calibration against published runs (calibration, calibration_points/),
the whole fine-tune (fine_tune), serving on other accelerators (serving) and which
accelerator to rent (recommend).

May import: every room below it (basics to tasks).
"""
