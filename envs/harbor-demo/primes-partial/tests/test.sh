#!/bin/bash
# Harbor verifier with partial credit: a third of the reward per correct line, in reward.json.
python3 /tests/score.py /app/primes.txt > /logs/verifier/reward.json
cat /logs/verifier/reward.json
