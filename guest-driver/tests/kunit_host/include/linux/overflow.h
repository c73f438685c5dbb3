/* SPDX-License-Identifier: GPL-2.0 */
#ifndef _KUNIT_HOST_OVERFLOW_H
#define _KUNIT_HOST_OVERFLOW_H
#define check_add_overflow(a, b, d) __builtin_add_overflow(a, b, d)
#endif
