/* Subcommands of the resil tool: each takes the arguments after "resil"
 * (argv[0] is the subcommand's name) and returns the process exit status:
 * 0 on success, 1 when the command failed, 2 on bad arguments. */
#ifndef RESIL_TOOL_CMDS_H
#define RESIL_TOOL_CMDS_H

/* resil describe: a chain's nesting, units, traps and amplification. */
int resil_cmd_describe(int argc, char **argv);

/* resil config check FILE...: loads registry files (registry.h) and prints
 * a summary or the error line (built with libresil-config). */
int resil_cmd_config(int argc, char **argv);

/* resil call: an HTTP call through the policies (built with libresil-http). */
int resil_cmd_call(int argc, char **argv);

/* resil state show|reset NAME: a shared segment's instances (shared.h). */
int resil_cmd_state(int argc, char **argv);

/* resil fixture [--port N] [--bind ADDR] [--verbose]: runs the
 * fault-injecting upstream until SIGINT or SIGTERM (built with the
 * fixture). */
int resil_cmd_fixture(int argc, char **argv);

/* resil upstream --store URI [--port N] [--crash-at POINT] ...: an
 * idempotent payment service in its own process, which can SIGKILL itself
 * at a chosen point of an operation (crash experiments, DESIGN §7 I8; built
 * with the fixture and libresil-store). */
int resil_cmd_upstream(int argc, char **argv);

/* resil relay [--to URL] [--work MS] ...: one hop of a chain of services,
 * taking its deadline from the caller's budget and forwarding what is left
 * (DESIGN §8.3; built with the fixture and libresil-mhd). */
int resil_cmd_relay(int argc, char **argv);

#endif
