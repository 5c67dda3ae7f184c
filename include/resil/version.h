/* libresil version information.
 *
 * RESIL_VERSION_* describe the headers a program was compiled against;
 * resil_version() and resil_version_num() describe the library it runs with.
 * Comparing the two catches a header/library mismatch. */
#ifndef RESIL_VERSION_H
#define RESIL_VERSION_H

#define RESIL_VERSION_MAJOR 0
#define RESIL_VERSION_MINOR 1
#define RESIL_VERSION_PATCH 0
#define RESIL_VERSION_STRING "0.1.0"

/* 0xMMmmpp, e.g. 0x000100 for 0.1.0. */
#define RESIL_VERSION_NUM                                                      \
  ((RESIL_VERSION_MAJOR << 16) | (RESIL_VERSION_MINOR << 8) | RESIL_VERSION_PATCH)

/* True when the headers are at least version x.y.z. */
#define RESIL_AT_LEAST_VERSION(x, y, z)                                        \
  (RESIL_VERSION_NUM >= (((x) << 16) | ((y) << 8) | (z)))

#if defined(_WIN32)
#define RESIL_API
#elif defined(__GNUC__) && __GNUC__ >= 4
#define RESIL_API __attribute__((visibility("default")))
#else
#define RESIL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0": the version of the library linked at run time. Static text. */
RESIL_API const char *resil_version(void);
/* RESIL_VERSION_NUM of the library linked at run time. */
RESIL_API unsigned resil_version_num(void);

#ifdef __cplusplus
}
#endif
#endif
