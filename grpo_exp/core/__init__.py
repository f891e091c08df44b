"""The ground floor: what every stage of a run uses - the run dir's layout and files, and how a run ended
(statuses, exit codes, the mismatch type). Nothing here imports a stage."""
