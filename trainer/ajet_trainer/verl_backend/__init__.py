"""The verl backend: verl's ppo_trainer config composed from the job, and store episodes as DataProto."""
