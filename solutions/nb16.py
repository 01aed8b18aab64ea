"""Worked solutions to notebook 16's exercises (pipeline parallelism)."""

# 16.1 GPipe, p = 8, m = 32. Each rank is busy m slots of forward+backward and the step lasts
# m + p - 1 slots (p - 1 of fill before the last stage starts, the same of drain), so the idle
# fraction is (p-1)/(m+p-1) = 7/39 = 0.1795. The Playbook's ratio to the ideal time is 7/32.
BUBBLE = 7 / 39

# 16.2 torch's Schedule1F1B plan, p = 4, m = 8, rank 1: p-1-r = 2 warm-up forwards, then one
# forward and one backward in turn: F0 F1 F2 B0 F3 B1 ... Index 4 (the fifth action) is F3.
SLOT = "F3"

# 16.3 1F1B, p = 8, m = 16: rank r holds its p-1-r warm-up micro-batches and the steady state's
# first forward before its first backward frees one: p - r. m does not matter as long as
# m >= p - r (in general min(p - r, m)).
HELD = [8, 7, 6, 5, 4, 3, 2, 1]

SOLUTIONS = {"16.1": BUBBLE, "16.2": SLOT, "16.3": HELD}

WRONG = {
    "16.1": [
        (7 / 32, "ratio"),
        (32 / 39, "busy"),
        (7 / 40, "off by one"),
        ("0.18", "number"),
        (100 * 7 / 39, "percentage"),
    ],
    "16.2": [
        ("F4", "GPipe"),
        ("B0", "too early"),
        ("F2", "index 2"),
        ("B1", "too late"),
        (3, "string"),
    ],
    "16.3": [
        ([16] * 8, "GPipe"),
        ([7, 6, 5, 4, 3, 2, 1, 0], "first forward"),
        ([8] * 8, "rank 0's peak"),
        ([1, 2, 3, 4, 5, 6, 7, 8], "reversed"),
        ([8, 7, 6], "per rank"),
    ],
}
