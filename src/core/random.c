/* Random identifiers from the kernel's CSPRNG (getrandom), for idempotency
 * keys. Compiled into every libresil library that needs it: the resil__
 * helpers are not exported from libresil.so. */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/random.h>

#include "internal.h"

int resil__random_hex(char *out, size_t nbytes) {
  unsigned char raw[64];
  if (nbytes > sizeof raw) return -1;
  size_t got = 0;
  while (got < nbytes) {
    ssize_t r = getrandom(raw + got, nbytes - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += (size_t)r;
  }
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < nbytes; i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[2 * nbytes] = '\0';
  return 0;
}
