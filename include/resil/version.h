/* libresil version information.
 *
 * One version for the whole project: CMakeLists.txt's project() version,
 * these macros, resil_version(), `resil --version` and the pkg-config and
 * CMake package versions agree (the build stops if they do not). API added
 * in a release is marked "Since X.Y" in the headers. The shared libraries'
 * soname is libresil*.so.0 for every 0.x release: 0.x releases only append
 * (functions, fields at the end of sized structs, see below), so a program
 * linked against an earlier 0.x keeps running (README "Versions").
 *
 * RESIL_VERSION_* describe the headers a program was compiled against;
 * resil_version() and resil_version_num() describe the library it runs with.
 * Comparing the two catches a header/library mismatch. */
#ifndef RESIL_VERSION_H
#define RESIL_VERSION_H

#define RESIL_VERSION_MAJOR 0
#define RESIL_VERSION_MINOR 2
#define RESIL_VERSION_PATCH 0
#define RESIL_VERSION_STRING "0.2.0"

/* 0xMMmmpp, e.g. 0x000200 for 0.2.0. */
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

/* Sized structs (DESIGN §11): an API that can grow.
 *
 * Every public struct a caller allocates -- configs, stats, metrics, infos,
 * endpoint entries -- begins with `size_t struct_size`, the size of the
 * struct the caller was compiled with. The functions that fill one
 * (resil_X_config_init(), resil_X_get_metrics(), ...) are macros that pass
 * sizeof of the type the caller sees, so the library reads and writes only
 * that much:
 *   - a config shorter than the library's (a program built against an older
 *     header) gets the documented defaults for the fields it does not have;
 *   - a config longer than the library's (built against a newer header) is
 *     accepted when the bytes the library does not know are all zero, and
 *     refused (RESIL_EINVAL naming the struct) otherwise;
 *   - a config whose struct_size is not a size the library can trust (0,
 *     or garbage because resil_X_config_init() was never called) is refused
 *     with "call resil_X_config_init()";
 *   - an out struct (metrics, stats, infos) is filled up to the caller's
 *     size; its struct_size then says how many bytes the library wrote, so
 *     a caller built against a newer header can tell which fields it got.
 * Structs the library hands out (events, attempt infos given to
 * listeners) carry struct_size too: the size the library filled.
 * Fields are only ever appended. */

#ifdef __cplusplus
extern "C" {
#endif

/* "0.2.0": the version of the library linked at run time. Static text. */
RESIL_API const char *resil_version(void);
/* RESIL_VERSION_NUM of the library linked at run time. */
RESIL_API unsigned resil_version_num(void);

#ifdef __cplusplus
}
#endif
#endif
