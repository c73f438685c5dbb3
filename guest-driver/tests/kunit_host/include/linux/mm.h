/* SPDX-License-Identifier: GPL-2.0 */
/* Host stand-in for <linux/mm.h>: 4 KiB pages, as on x86-64. */
#ifndef _KUNIT_HOST_MM_H
#define _KUNIT_HOST_MM_H
#define PAGE_SHIFT 12
#define PAGE_SIZE (1UL << PAGE_SHIFT)
#define PAGE_MASK (~(PAGE_SIZE - 1))
#endif
