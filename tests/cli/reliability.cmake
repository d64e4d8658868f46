# Reliability: every bad input exits 2 naming where and what to do, and `validate` agrees with `run`
# (tests/cli/agree.sh runs both: same exit code, same error lines, and a failed run leaves --out as it
# was, without temporary directories). docs/reliability.md has the classes and the exit codes.
set(R ${CMAKE_CURRENT_SOURCE_DIR}/data/reliability)
function(tessera_agree name code regex)
  add_test(NAME cli.agree_${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/agree.sh ${code} "${regex}" $<TARGET_FILE:tessera> ${CMAKE_CURRENT_BINARY_DIR}/agree/${name} ${ARGN}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endfunction()

# Scenario files.
tessera_agree(number_overflow 2 "overflow_number.json:4:45: the number 1e400 is out of range" ${R}/overflow_number.json)
tessera_agree(set_number_overflow 2 "/run/max_time \\(from --set\\): '1e400' is not finite" ${R}/mlp_ref.json --set run.max_time=1e400)
tessera_agree(scenario_is_a_directory 2 "scenarios/wafer/micro: is a directory, not a scenario file \\(give a scenario file, e.g. scenarios/wafer/micro/gemv_8x8.json" scenarios/wafer/micro)
tessera_agree(scenario_is_a_layout 2 "gemv_8x8.json: this is a wafer layout file \\(tessera.wafer-layout/1\\), not a scenario \\(run the scenario that names it: scenarios/wafer/micro/gemv_8x8_run.json\\)" scenarios/wafer/micro/gemv_8x8.json)
# Models.
tessera_agree(model_random_bytes 2 "random_bytes.onnx: not a valid ONNX model \\(protobuf parsing failed" ${R}/random_bytes_model.json)
tessera_agree(model_empty 2 "empty.onnx: the file is empty \\(0 bytes\\), not an ONNX model" ${R}/empty_model.json)
tessera_agree(model_is_a_directory 2 "/model/onnx: .*a_directory.onnx is a directory, not a file" ${R}/directory_model.json)
# Host memory: estimated before anything is allocated; counts that do not fit in int64.
tessera_agree(huge_relu 2 "/run/host_memory: the run needs about 447.0 GiB of host memory \\(inputs and expected values 149.0 GiB, reference executor 298.0 GiB\\); the budget is 16.0 GiB \\(raise run.host_memory" ${R}/huge_relu.json)
tessera_agree(huge_relu_on_neuroncore 2 "/run/host_memory: the run needs about" ${R}/huge_relu.json --set target.kind=neuroncore --set precision.compute=fp32)
tessera_agree(count_overflow 2 "input 'x': shape \\[4000000000, 4000000000, 4\\] has more elements than a 64-bit count holds" ${R}/count_overflow.json)
tessera_golden(graph_huge_matmul_flops graph ${R}/huge_matmul.json)
# Input files: header, length, shape and dtype, before anything is compiled.
tessera_agree(npy_truncated 2 "/inputs/x/file: .*x_truncated.npy \\(header field 'shape'\\): data holds 960 bytes but shape \\[8, 64\\] of <f4 needs 2048" ${R}/mlp_ref.json --set inputs.x.file=x_truncated.npy)
tessera_agree(npy_wrong_shape 2 "/inputs/x/file: shape \\[8, 65\\] does not match the model input's \\[8, 64\\]" ${R}/mlp_nc.json --set inputs.x.file=x_wrong_shape.npy)
foreach(t f64:fp64:float64 f16:fp16:float16 i32:int32:int32 bool:bool:bool_)
  string(REPLACE ":" ";" p ${t})
  list(GET p 0 f)
  list(GET p 1 dt)
  list(GET p 2 np)
  tessera_agree(npy_dtype_${f} 2 "/inputs/x/file: x_${f}.npy holds ${dt} \\(numpy ${np}\\) but the model input 'x' is fp32; tessera does not convert silently \\(convert it: np.save\\('x_${f}.npy', np.load\\('x_${f}.npy'\\).astype\\(np.float32\\)\\), or set \"cast\": true under /inputs/x" ${R}/mlp_ref.json --set inputs.x.file=x_${f}.npy)
endforeach()
tessera_agree(npy_dtype_on_neuroncore 2 "x_f64.npy holds fp64 \\(numpy float64\\) but the model input 'x' is fp32" ${R}/mlp_nc.json --set inputs.x.file=x_f64.npy)
tessera_agree(npy_cast_opt_in 0 "y fp32\\[8, 10\\] +max abs err .* PASS" ${R}/mlp_ref.json --set inputs.x.file=x_f64.npy --set inputs.x.cast=true)
tessera_agree(gather_index_out_of_range 2 "/inputs/tokens/file: node 'Gather_0' \\(Gather, opset 17\\): index 300 is out of range for axis 0 of data \\[300, 200\\]" ${D}/nc_gather_rows.json --set inputs.tokens.file=nc_gather_bad_tokens.npy)
# Ops the target does not compile are found by validate (it compiles the model); Abs compiles.
tessera_agree(nc_topk 2 "node 'topk' \\(TopK, opset 17\\): the NeuronCore compiler cannot compile this" ${R}/nc_topk.json)
tessera_agree(nc_einsum 2 "node 'einsum' \\(Einsum, opset 17\\): the NeuronCore compiler cannot compile this" ${R}/nc_einsum.json)
tessera_agree(nc_abs 0 "y fp32\\[8, 64\\] +vs reference: .* PASS" ${R}/nc_abs.json)
# Hardware parameters that make a tile impossible: named kernel and bytes, in validate and run.
tessera_agree(nc_psum_schedule_tile 2 "kernel 'matmul': a 512-wide output tile \\(the schedule's tile\\) needs 2048 bytes of a PSUM bank for its fp32 sums; a bank has 128 \\(psum.partition_bytes 1024 / psum.banks 8\\)" ${NKI}/1_tiled.json --no-numerics --set target.params.psum.partition_bytes=1KiB)
tessera_agree(nc_psum_tile_n 2 "kernel '/fc1/Gemm': a 512-wide output tile \\(mapping.tile_n\\) needs 2048 bytes of a PSUM bank" ${R}/mlp_nc.json --set target.params.psum.partition_bytes=1KiB --set mapping.tile_n=512)
tessera_agree(nc_psum_auto_tiles_fit 0 "y fp32\\[8, 10\\] +vs file: .* PASS" ${R}/mlp_nc.json --set target.params.psum.partition_bytes=1KiB)
tessera_agree(nc_sbuf_row 2 "rows of 8000 elements with their scale and bias need [0-9]+ bytes of SBUF per partition; it has 196608" ${D}/nc_layernorm_8000.json)
tessera_agree(nc_sbuf_blocks 2 "kernel 'matmul': needs [0-9]+ bytes of SBUF per partition; it has 196608" ${NKI}/3_blocked_mn.json --no-numerics --set mapping.block_n=4)
tessera_agree(nc_program_rules 2 "4 problems:.*beyond the 196608 bytes" ${D}/nc_bad_rules.json)
tessera_agree(wafer_weights_do_not_fit 2 "/mapping/mode: the weights \\(3670016 bytes in fp32\\) do not fit on the wafer in pipelined mode" scenarios/wafer/deep_mlp/deep_mlp_streaming.json --set mapping.mode=pipelined)
tessera_agree(wafer_fabric_host_memory 2 "broadcast_wse2.json: the fabric's state needs about 1[0-9][0-9]\\.[0-9] MiB of host memory" scenarios/wafer/scale/broadcast_wse2_run.json --set run.host_memory=50MiB)
tessera_agree(wafer_fault_bad_direction 2 "/run/faults/0: PE \\(3,2\\): color 1 is never sent E from this router" scenarios/wafer/micro/gemv_8x8_run.json --set "run.faults=[{\"kind\":\"drop_wavelets\",\"pe\":[3,2],\"direction\":\"E\",\"color\":1}]")

# --out: a file, a path under a file, a place that cannot be written, a directory tessera did not write.
tessera_golden(out_is_a_file run scenarios/reference/mlp.json --out README.md)
tessera_golden(out_under_a_file run scenarios/reference/mlp.json --out README.md/x)
tessera_golden(out_not_writable run scenarios/reference/mlp.json --out /proc/tessera-out)
tessera_golden(out_not_ours run scenarios/reference/mlp.json --out scenarios/reference)
tessera_golden(validate_out_checked validate scenarios/reference/mlp.json --out README.md)
# All or nothing: a failed run leaves an earlier run's outputs whole; a run replaces them whole.
add_test(NAME cli.outputs_all_or_nothing COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/all_or_nothing.sh $<TARGET_FILE:tessera> ${R} ${CMAKE_CURRENT_BINARY_DIR}/all_or_nothing
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.outputs_all_or_nothing PROPERTIES PASS_REGULAR_EXPRESSION "all-or-nothing: PASS")
# Runs racing for a parent of --out that none of them found (a failed run removes the empty parents
# it created): each ends as it would alone (the agree tests share such a parent under ctest -j).
add_test(NAME cli.out_parent_race COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/out_race.sh $<TARGET_FILE:tessera> ${R} ${CMAKE_CURRENT_BINARY_DIR}/out_race
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.out_parent_race PROPERTIES PASS_REGULAR_EXPRESSION "out race: PASS")
# Memory the machine refuses (ulimit): std::bad_alloc is exit 2 naming the phase, not an internal error.
# Not under AddressSanitizer: it reserves terabytes of shadow address space (no ulimit -v) and its
# operator new reports an out-of-memory instead of throwing std::bad_alloc.
if(NOT TESSERA_SANITIZE)
  add_test(NAME cli.out_of_memory
           COMMAND bash -c "ulimit -v 1500000; $<TARGET_FILE:tessera> run ${R}/huge_relu.json --set 'model.graph.inputs.x.shape=[20000,20000]' --set run.host_memory=64GiB --out ${CMAKE_CURRENT_BINARY_DIR}/oom; echo \"exit $?\""
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.out_of_memory PROPERTIES PASS_REGULAR_EXPRESSION "error: host memory \\([a-z]+\\): this machine ran out of memory during [a-z]+ .*run.host_memory.*exit 2")
endif()

# Signals: SIGINT in every phase of the NKI matmul scenario (at 1024 x 512 x 1024 here; the note of
# issue 19 has the full-size figures) exits 130 within 1 s with --out untouched; mid-phase in the
# longer phases at a medium size; SIGTERM exits 143 with the same cleanup and flushes stdout.
add_test(NAME cli.sigint_every_phase
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sigint_phases.sh $<TARGET_FILE:tessera> ${CMAKE_CURRENT_BINARY_DIR}/sigint_phases 0
                 ${NKI}/1_tiled.json --set "model.graph.inputs.lhsT.shape=[1024,512]" --set "model.graph.inputs.rhs.shape=[1024,1024]"
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME cli.sigint_mid_phase
         COMMAND env "PHASES=inputs reference simulate" bash ${CMAKE_CURRENT_SOURCE_DIR}/sigint_phases.sh $<TARGET_FILE:tessera> ${CMAKE_CURRENT_BINARY_DIR}/sigint_mid 150
                 ${NKI}/1_tiled.json --set "model.graph.inputs.lhsT.shape=[2048,2048]" --set "model.graph.inputs.rhs.shape=[2048,2048]"
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.sigint_every_phase cli.sigint_mid_phase PROPERTIES PASS_REGULAR_EXPRESSION "sigint in every phase: PASS" TIMEOUT 300)
add_test(NAME cli.sigterm_neuroncore COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sigint.sh $<TARGET_FILE:tessera>
         ${D}/long_run.json ${CMAKE_CURRENT_BINARY_DIR}/sigterm/out TERM WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.sigterm_neuroncore PROPERTIES TIMEOUT 120)
add_test(NAME cli.sigterm_flushes_stdout
         COMMAND bash -c "TESSERA_INTERRUPT_AT=simulate:0:TERM $<TARGET_FILE:tessera> run scenarios/quickstart.json --out ${CMAKE_CURRENT_BINARY_DIR}/sigterm_stdout > ${CMAKE_CURRENT_BINARY_DIR}/sigterm_stdout.txt 2> ${CMAKE_CURRENT_BINARY_DIR}/sigterm_stderr.txt; echo \"exit $?\"; cat ${CMAKE_CURRENT_BINARY_DIR}/sigterm_stdout.txt ${CMAKE_CURRENT_BINARY_DIR}/sigterm_stderr.txt"
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.sigterm_flushes_stdout PROPERTIES PASS_REGULAR_EXPRESSION "exit 143.*predicted [0-9.]+ us .*terminated \\(SIGTERM\\) during simulate")

# Every golden test of `run` that exits 2: `validate` with the same arguments agrees (exit 2, the
# same error lines), but for the few errors only a simulation finds (listed in the script).
add_test(NAME cli.validate_agrees_with_run
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/validate_agrees.sh $<TARGET_FILE:tessera> ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.validate_agrees_with_run PROPERTIES PASS_REGULAR_EXPRESSION "validate agrees with run: PASS")
