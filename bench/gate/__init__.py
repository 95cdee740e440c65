"""``bench gate`` and its rules, baselines and named suites: did a change make a lock slower or unsafe?"""
