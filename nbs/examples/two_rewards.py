"""The two reward functions of `59c_gdpo` (TRL's signature): correctness on the D3 task, and a length bonus that spreads
wider within a group than correctness does."""
from rl_notes.tasks import get_task
_TASK = get_task("addition", min_digits=1, max_digits=4, scratchpad=True)

def right(prompts, completions, answer, **kw):
    "1 for a correct final answer, 0 otherwise (the task's verifier)."
    return [float(_TASK.verify({"answer": a}, c)[0]) for c, a in zip(completions, answer)]

def long(prompts, completions, **kw):
    "A length bonus: 2 x the share of 60 characters the response uses."
    return [2.0 * min(len(c), 60) / 60 for c in completions]

def long20(prompts, completions, **kw):
    "The same length bonus on a 10x larger scale: 20 x the share of 60 characters the response uses."
    return [20.0 * min(len(c), 60) / 60 for c in completions]
