"""Adapters from swerl episodes to trainers (TRL, SkyRL, verl); each imports its trainer lazily."""
