/* SPDX-License-Identifier: GPL-2.0 */
#include <stdio.h>
#include <string.h>
#define strscpy(d, s, n) snprintf((d), (n), "%s", (s))
