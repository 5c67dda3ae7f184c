/* resil: the command-line tool. Subcommands live in cmd_*.c and lab*.c. */
#include <stdio.h>
#include <string.h>

#include "cmds.h"
#include "lab.h"
#include "resil/resil.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: resil COMMAND [ARGS]\n"
          "commands:\n"
          "  lab        run the failure experiments and print what they measured\n"
          "  describe   print a chain's nesting, units, traps and amplification\n"
          "  config     check a registry file (config check FILE)\n"
#ifdef RESIL_HAVE_HTTP
          "  call       make an HTTP call through the policies (curl-like)\n"
#endif
#ifdef RESIL_HAVE_FIXTURE
          "  fixture    run the fault-injecting upstream on 127.0.0.1\n"
#endif
#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_STORE)
          "  upstream   run an idempotent payment service that can crash itself\n"
          "  relay      run one hop of a chain: the caller's deadline in, what is left out\n"
#endif
          "  state      show or reset a shared segment's instances (state show NAME)\n"
          "  version    print the version\n"
          "Run 'resil COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "lab") == 0) return lab_main(argc - 1, argv + 1);
  if (strcmp(cmd, "describe") == 0) return resil_cmd_describe(argc - 1, argv + 1);
  if (strcmp(cmd, "config") == 0) return resil_cmd_config(argc - 1, argv + 1);
  if (strcmp(cmd, "state") == 0) return resil_cmd_state(argc - 1, argv + 1);
#ifdef RESIL_HAVE_HTTP
  if (strcmp(cmd, "call") == 0) return resil_cmd_call(argc - 1, argv + 1);
#endif
#ifdef RESIL_HAVE_FIXTURE
  if (strcmp(cmd, "fixture") == 0) return resil_cmd_fixture(argc - 1, argv + 1);
#endif
#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_STORE)
  if (strcmp(cmd, "upstream") == 0) return resil_cmd_upstream(argc - 1, argv + 1);
  if (strcmp(cmd, "relay") == 0) return resil_cmd_relay(argc - 1, argv + 1);
#endif
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("resil %s\n", resil_version());
    return 0;
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 ||
      strcmp(cmd, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "resil: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
