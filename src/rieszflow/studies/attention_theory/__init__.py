"""The ``attention-theory`` study: paper 004's Lipschitz and contraction bounds, measured.

Every bound of paper 004 sections 5-6 (Prop. 19-21, 25, Thm. 23, Cor. 24, 30, Lemma 31, 40,
Prop. 26) is evaluated next to the empirical W1 ratio on random and adversarial token sets,
together with the corrected constants of the implementation spec; see
``docs/attention_theory.md`` and :func:`~rieszflow.studies.attention_theory.study.run`.
"""
