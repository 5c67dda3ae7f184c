/* Small helpers shared by the resil subcommands. */
#ifndef RESIL_TOOL_CLI_H
#define RESIL_TOOL_CLI_H

#include <stddef.h>

/* The value of option `name` at argv[*i]: "--name=V" or "--name V" (then
 * *i moves past V). Returns NULL when argv[*i] is not that option; sets
 * *missing when it is but has no value. */
const char *resil_cli_option_value(int argc, char **argv, int *i,
                                   const char *name, int *missing);

/* The lowest of the descriptors 0, 1 and 2 that is not open, or -1 when
 * all three are. A command must check this before it opens anything: a
 * closed stdout would otherwise be reused by the next descriptor opened
 * (libcurl's socketpair, a file), and what is meant for stdout would be
 * written into it. */
int resil_cli_closed_std_fd(void);

/* An instance of an upstream (resil_http_instance_stats.instance) fit to
 * print, into buf: its URL redacted as the library's log redacts one
 * (userinfo, secret-looking parameters) and escaped. resolved: it is a
 * resolved name's "base_url@address" (resolve_instances), whose base URL is
 * redacted and whose address is kept; a URL redactor alone would take
 * "base_url@" for userinfo and hide the name. */
void resil_cli_instance_text(char *buf, size_t n, const char *instance, int resolved);

#endif
