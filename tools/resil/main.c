#include <stdio.h>
#include <string.h>

#include "resil/resil.h"

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    printf("resil %s\n", resil_version());
    return 0;
  }
  fprintf(stderr, "usage: resil lab|--version\n");
  return 2;
}
