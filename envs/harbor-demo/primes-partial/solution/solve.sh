#!/bin/bash
printf '2\n3\n5\n' > /app/primes.txt
