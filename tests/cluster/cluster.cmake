# Tests across the nodes of a cluster in a box (tools/cluster.sh: network namespaces joined by a
# bridge; DESIGN.md §9.1). Label `cluster`; one at a time (one cluster per host); skipped (status
# 77, one line) where this host cannot make network namespaces (not root) or mpiexec is not
# MPICH's hydra. Usage inside a script as the script tests: $1 upipe, $2 build dir, $3 source dir.
# Preloaded into the ranks: marks each rank's MPI_Finalize (tests/cluster/job.sh says why).
add_library(finalize_mark SHARED ${CMAKE_CURRENT_SOURCE_DIR}/cluster/finalize_mark.c)
target_link_libraries(finalize_mark PRIVATE MPI::MPI_C)
function(upipe_cluster_test name) # extra labels...
  set(labels cluster ${ARGN})
  add_test(NAME cluster_${name}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/${name}.sh
            $<TARGET_FILE:upipe> ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
  set_tests_properties(cluster_${name} PROPERTIES
    ENVIRONMENT "MPIEXEC=${MPIEXEC_EXECUTABLE};FINALIZE_MARK=$<TARGET_FILE:finalize_mark>"
    LABELS "${labels}" TIMEOUT 600 SKIP_RETURN_CODE 77 RESOURCE_LOCK upipe_cluster)
endfunction()
upipe_cluster_test(fixture)
upipe_cluster_test(correct)
upipe_cluster_test(ckpt)
upipe_cluster_test(layout)
upipe_cluster_test(lost)
