#!/bin/bash
# Harbor verifier: 1 when /app/greeting.txt holds exactly the greeting, else 0.
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "Hello, Harbor!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "greeting.txt is missing or wrong"
  echo 0 > /logs/verifier/reward.txt
fi
