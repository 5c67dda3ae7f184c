/* Helpers shared by the resil subcommands (cli.h). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

const char *resil_cli_option_value(int argc, char **argv, int *i,
                                   const char *name, int *missing) {
  size_t n = strlen(name);
  const char *a = argv[*i];
  if (strncmp(a, name, n) != 0) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n] != '\0') return NULL;
  if (*i + 1 >= argc) {
    *missing = 1;
    return NULL;
  }
  return argv[++*i];
}

int resil_cli_closed_std_fd(void) {
  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) return fd;
  return -1;
}
