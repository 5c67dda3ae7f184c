# ctest bench_report_format: `resil_bench report` on fixed inputs
# (bench/testdata: C results with physical references, a perf-r4j JSON)
# prints each policy case against the physical references and its floor,
# the Resilience4j table with the issue's targets, and every same-run ratio
# with its reference, target and verdict; without perf-r4j's JSON it says
# "R4j: skipped (reason)" and still succeeds. No timing: the figures are the
# fixtures'.
#   cmake -DBIN=<resil_bench> -DDATA=<bench/testdata> -DOUT=<dir> -P test_report.cmake
function(run_report out_var json)
  execute_process(COMMAND ${BIN} report --c ${DATA}/report_c.json --peers-skipped "fixture"
                          ${ARGN} --out ${json}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "resil_bench report ${ARGN} exited ${rc}: ${err}\n${out}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

function(expect text regex)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "expected a line matching\n  ${regex}\nin\n${text}")
  endif()
endfunction()

file(MAKE_DIRECTORY ${OUT})
run_report(out ${OUT}/with-r4j.json --r4j ${DATA}/report_r4j.json)
# The physical references of the run, and each case in them.
expect("${out}" "atomic fetch_add 2\\.00 ns, xchg 2\\.00 ns, CAS 2\\.50 ns; CLOCK_MONOTONIC read 20\\.00 ns, CLOCK_MONOTONIC_COARSE read 5\\.00 ns; indirect call 1\\.50 ns")
expect("${out}" "bulkhead_acquire_release +5\\.00 ns = +2\\.5 RMW = +x1\\.00 its floor \\(5\\.00 ns: 2 CAS\\)\n")
expect("${out}" "breaker_run +33\\.00 ns = +16\\.5 RMW = +x2\\.44 its floor \\(13\\.50 ns: 1 xchg \\+ 2 coarse reads \\+ 1 indirect call\\)\n")
# Resilience4j: ratio, range, target, verdict; the 2-thread scaling.
expect("${out}" "Resilience4j 2\\.3\\.0 vs libresil[^\n]*abc1234; 2 alternations[^\n]*load at start 0\\.10, 0\\.20, 0\\.30")
expect("${out}" "bulkhead_acquire_release +12\\.50 +5\\.00 +2\\.50 +2\\.25\\.\\.2\\.75 +>= 2 +yes")
expect("${out}" "breaker_2threads +120\\.00 +40\\.00 +3\\.00 +3\\.00\\.\\.3\\.00 +>= 4 +NO [^\n]*= 0\\.50 of breaker_1thread's \\(target >= 0\\.5\\) yes")
expect("${out}" "retry_run +- +- +- +- +>= 5 +NO +not in perf-r4j's results")
# Same-run ratios name their reference and target.
expect("${out}" "http_keepalive_get +vs bare libcurl \\[1 caller, 4 rounds\\]: caller CPU/req 22\\.00 / 20\\.00 us = x1\\.100 \\(target <= 1\\.05\\) NO; p50 30\\.0 / 28\\.5 us, added \\+1\\.50 us \\(target <= 3 us\\) yes; req/s 9700 / 10000 = 0\\.970 \\(target >= 0\\.95\\) yes")
expect("${out}" "store_sqlite_keyed_ops +vs raw INSERT: ops/s 500 / 1000 = 0\\.500 \\(target >= 0\\.45\\) yes")
expect("${out}" "shared_ratelimiter_acquire +16\\.00 ns / ratelimiter_acquire 10\\.00 ns = x1\\.600 \\(target <= 1\\.50\\) NO\n")
expect("${out}" "shared_breaker_4procs +4 processes 36\\.00 M ops/s / 4 threads 80\\.00 M ops/s = 0\\.450 \\(target >= 0\\.50\\) NO \\(ratio of the medians 0\\.450\\) \\[3 rounds of 1000 ms, load 1\\.50\\.\\.2\\.50\\]")
# The breaker's ramp against the plain breaker (issue 23), same run.
expect("${out}" "breaker_ramp_acquire_record +13\\.00 ns / 10\\.00 ns = x1\\.300 \\(x1\\.250\\.\\.x1\\.400\\) \\(target <= 1\\.20\\) NO \\[admitted 100\\.0 %, 9 rounds, load 1\\.00\\.\\.1\\.50\\]")
# Its floor: the reference plus what a ramping call adds (the
# accumulator's fetch_add 2 ns + a coarse read 5 ns) over the reference.
expect("${out}" "its floor: 1 fetch_add \\+ 1 xchg \\+ 1 coarse read = the reference's \\+ 7\\.00 ns: x1\\.700 \\(the target is below it\\)")
expect("${out}" "breaker_ramp_off_acquire_record +10\\.10 ns / 10\\.00 ns = x1\\.010 \\(x0\\.980\\.\\.x1\\.030\\) \\(target <= 1\\.05\\) yes")
expect("${out}" "MISSED: breaker_ramp_acquire_record ns_per_call <= 1\\.20x breaker_acquire_record's \\(same run\\)")
expect("${out}" "cli_call_state_nginx +plain 6\\.500 ms, --state 6\\.750 ms, added \\+0\\.250 ms \\(target <= 1\\.0\\) yes; CPU 6\\.00 / 6\\.20 ms \\[100 pairs, load 1\\.00\\.\\.1\\.25\\]")
expect("${out}" "MISSED: breaker_2threads Resilience4j ns / libresil ns >= 4 \\(perf-r4j\\) \\(value 3\\)")
file(READ ${OUT}/with-r4j.json json)
foreach(key "\"hardware_floor\"" "\"ratio_to_floor\": 2" "\"in_rmw\": 2\\.5" "\"r4j\"" "\"c_ops_per_s_over_1thread\": 0\\.5" "\"physical\"")
  expect("${json}" "${key}")
endforeach()

# The rate limiter on Redis against bare hiredis: blocking EVALSHA, and
# async with 1,000 in flight (a ratio below the target: NO, and MISSED).
expect("${out}" "redis_ratelimiter_acquire +vs bare hiredis EVALSHA \\[15 rounds of 5000, load 0\\.50\\.\\.0\\.75\\]: 20\\.00 / 19\\.00 us per decision, rate ratio 0\\.950 \\(target >= 0\\.90\\) yes \\(median of per-round ratios 0\\.960\\); caller CPU 6\\.00 / 5\\.50 us = x1\\.09 \\(not a target\\)")
# The deadline header's cost: caller CPU with / without, target, verdict;
# a skipped case says why.
expect("${out}" "http_deadline_header_cost +caller CPU 12\\.60 / 12\\.50 us per request, ratio 1\\.0080 \\(target <= 1\\.01\\) yes \\(ratio of the medians 1\\.0080\\); wall 30\\.00 / 29\\.90 us = x1\\.003  \\[56 rounds of 1000, load 2\\.50\\.\\.3\\.00\\]")
expect("${out}" "bare libcurl, the same line or none: caller CPU 11\\.60 / 11\\.50 us, ratio 1\\.0087 \\(the reference")
expect("${out}" "http_deadline_header_cost_nginx +SKIPPED: no nginx")
expect("${out}" "redis_engine_decisions +vs bare hiredis async, 1000 in flight \\[15 rounds of 20000, load 1\\.00\\.\\.1\\.50\\]: 85000 / 100000 decisions/s, rate ratio 0\\.850 \\(target >= 0\\.90\\) NO \\(median of per-round ratios 0\\.860\\); loop CPU 1\\.20 / 0\\.90 us per decision = x1\\.33, redis-server busy 0\\.80 / 0\\.95 \\(not targets\\)")
expect("${out}" "MISSED: redis_engine_decisions libresil-redis engine-path decisions/s >= 0\\.90x bare hiredis async's, 1000 in flight \\(same run\\) \\(value 0\\.85\\)")
# Many instances: caller CPU over 4 instances vs one (met), the engine's
# req/s over 4 vs one (missed), each with the instances' shares.
expect("${out}" "http_instances_choice_nginx +caller CPU 15\\.15 us per request over 4 instances, 15\\.00 over one, ratio 1\\.0120 \\(target <= 1\\.02\\) yes \\(ratio of the medians 1\\.0100\\); wall 40\\.40 / 40\\.00 us = x1\\.010; shares 0\\.250 / 0\\.249 / 0\\.251 / 0\\.250; 0\\.000 connections opened per request  \\[56 rounds of 1000, load 2\\.00\\.\\.2\\.50\\]")
expect("${out}" "4 instances that are all the first URL \\(one origin, one connection\\): caller CPU 15\\.07 us per request, ratio 1\\.0050 \\(not a target\\)")
expect("${out}" "async_instances_1000_inflight +1000 in flight: 9300 req/s over 4 instances \\(16 connections each at most\\), 10000 over one, ratio 0\\.930 \\(target >= 0\\.95\\) NO \\(ratio of the medians 0\\.930\\); loop CPU 40\\.00 / 38\\.00 us per request \\(not a target\\); shares 0\\.300 / 0\\.200 / 0\\.250 / 0\\.250  \\[7 rounds, load 1\\.00\\.\\.1\\.25\\]")
expect("${out}" "the same client with 64 connections per instance: 5000 req/s, ratio 0\\.500, loop CPU 76\\.00 us per request, 0\\.600 connections opened per request \\(not a target\\)")
expect("${out}" "MISSED: async_instances_1000_inflight engine req/s over several instances >= 0\\.95x over one, 1000 in flight \\(same run\\) \\(value 0\\.93\\)")
run_report(out ${OUT}/skipped.json --r4j-skipped "java is not on PATH")
expect("${out}" "\nR4j: skipped \\(java is not on PATH\\)\n")
expect("${out}" "targets: [0-9]+ met, [0-9]+ missed, 1[0-9] not evaluated")
run_report(out ${OUT}/none.json)
expect("${out}" "\nR4j: skipped \\(no --r4j FILE given\\)\n")
