"""What attention and models cost: analytic FLOPs, attended keys and coverage (`efficiency`),
and measured speed and peak memory (`efficiency_measure`, timed by `lab.machine.measure`).
"""
