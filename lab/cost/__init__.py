"""What attention and models cost: analytic FLOPs, attended keys and coverage (`efficiency`),
measured speed and peak memory (`efficiency_measure`) through one timing harness (`measure`),
and how busy the machine was while we timed (`contention`).
"""
