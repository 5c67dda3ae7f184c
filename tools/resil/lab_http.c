/* Lab experiments H1-H16 and P13: libresil-http against the fixture. */
#include "lab.h"

const lab_experiment lab_http_experiments[] = {{NULL, NULL, NULL}};
