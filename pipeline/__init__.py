"""semworld's pipeline: data, training loops, rollouts and the command line; imports models/, never FastAPI."""
