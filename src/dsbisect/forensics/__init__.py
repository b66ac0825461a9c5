"""Why a hang hung or a crash crashed, read from what a run left: the deadlock proof, PyTorch's
flight recorder, Python stacks, where each rank was stuck, live evidence, the first traceback.

Imports: core, search, verdict, records, store.
"""
