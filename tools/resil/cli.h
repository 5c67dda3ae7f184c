/* Small helpers shared by the resil subcommands. */
#ifndef RESIL_TOOL_CLI_H
#define RESIL_TOOL_CLI_H

/* The value of option `name` at argv[*i]: "--name=V" or "--name V" (then
 * *i moves past V). Returns NULL when argv[*i] is not that option; sets
 * *missing when it is but has no value. */
const char *resil_cli_option_value(int argc, char **argv, int *i,
                                   const char *name, int *missing);

#endif
