"""What every family builds on: argument checks, the blocked similarity scan and its memory planner,
exact top-k selection over key blocks, identical rows and their owners, tie statistics, order-free
sums, the opt-in compiled passes and block progress.
"""
