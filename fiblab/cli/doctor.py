"""`fiblab doctor`: this machine, the lab's choices on it and the times to expect
(`fiblab.doctor`)."""

from __future__ import annotations


def cmd_doctor(args) -> int:
    from fiblab.doctor import diagnose, format_doctor
    from lab.util import jsonio

    if args.reps < 1:
        raise ValueError(f"--reps {args.reps} must be >= 1 (timed steps of each measurement)")
    report = diagnose(reps=args.reps, retune=args.retune)
    print(jsonio.dumps(report, indent=1) if args.json else format_doctor(report))
    return 0
