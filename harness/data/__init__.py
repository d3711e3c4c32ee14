"""The data a training run feeds: the synthetic function-calling set (function_calling),
its tokenizer made locally (tokenizer), rows packed or padded into the plan's batches
(batches) and the one count of examples in them (examples).

May import: basics, scenario, figures, plan.
"""
