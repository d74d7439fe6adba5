#!/bin/bash
set -e
echo "Hello, Harbor!" > /app/greeting.txt
