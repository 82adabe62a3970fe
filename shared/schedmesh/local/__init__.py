"""A mesh on this machine: its processes under a supervisor (supervisor.py), starting and stopping
them (launch.py), and a client of its Scheduler API (client.py). The CLI's `up`, `down` and every
command that talks to a mesh use it, and so does the bench, which depends on no CLI module."""
