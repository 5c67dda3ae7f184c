/* Helpers shared by the resil subcommands (cli.h). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "core/redact.h"

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

void resil_cli_instance_text(char *buf, size_t n, const char *instance, int resolved) {
  const char *at = resolved ? strrchr(instance, '@') : NULL;
  if (!at) {
    resil__redact_excerpt(buf, n, instance, strlen(instance), RESIL__REDACT_URL, NULL);
    return;
  }
  char base[400], addr[80];
  resil__redact_excerpt(base, sizeof base, instance, (size_t)(at - instance), RESIL__REDACT_URL,
                        NULL);
  resil__redact_excerpt(addr, sizeof addr, at + 1, strlen(at + 1), RESIL__REDACT_NONE, NULL);
  if (snprintf(buf, n, "%s@%s", base, addr) >= (int)n && n > 3) memcpy(buf + n - 4, "...", 4);
}

int resil_cli_closed_std_fd(void) {
  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) return fd;
  return -1;
}
