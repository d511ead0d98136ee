# SLURM for real (tests/slurm/slurm.sh, issue 27 point 6): munged, slurmctld and one slurmd
# started by hand in a temporary folder, the README's batch script (srun --mpi=pmi2) stopped by
# SIGTERM, requeued and resumed to the weights of an uninterrupted run. Needs root and the Debian
# packages slurmctld, slurmd, slurm-client and munge (tools/install-deps.sh); skipped (77) with a
# line without them. The script's own bound (its 5th argument) ends it, daemons stopped, before
# ctest's TIMEOUT would kill it and leave them running. One cluster at a time (RESOURCE_LOCK).
# - slurm_preempt: preemption (GraceTime 0 and 30); 21-22 s measured on a loaded 2-core host.
# - slurm_timelimit: --time=1 --signal=TERM@60; 44 s measured, most of it waiting for slurmctld's
#   time-limit check (every 30 s), hence slow.
add_test(NAME slurm_preempt
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/slurm.sh $<TARGET_FILE:upipe> ${CMAKE_BINARY_DIR}
          ${CMAKE_SOURCE_DIR} preempt 150)
set_tests_properties(slurm_preempt PROPERTIES LABELS slurm TIMEOUT 200 SKIP_RETURN_CODE 77
  RESOURCE_LOCK slurm ENVIRONMENT "MPIEXEC=${MPIEXEC_EXECUTABLE}")
add_test(NAME slurm_timelimit
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/slurm.sh $<TARGET_FILE:upipe> ${CMAKE_BINARY_DIR}
          ${CMAKE_SOURCE_DIR} timelimit 240)
set_tests_properties(slurm_timelimit PROPERTIES LABELS "slurm;slow" TIMEOUT 300
  SKIP_RETURN_CODE 77 RESOURCE_LOCK slurm ENVIRONMENT "MPIEXEC=${MPIEXEC_EXECUTABLE}")
