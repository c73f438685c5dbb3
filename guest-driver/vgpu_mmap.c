// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_mmap.c - mmap() of /dev/vgpu: pinned memory the driver allocates in
 * physically contiguous chunks as large as the buddy allocator gives, for
 * cudaMallocHost()/cudaHostAlloc(). The host sees few segments for it, and
 * VGPU_IOC_REGISTER on it takes no second pin.
 *
 * The chunks are split into order-0 pages and inserted with vm_insert_page(),
 * so calls may also name this memory as ordinary user buffers (they pin it
 * like any other page). The memory lives until the last mapping of it is
 * gone and no registration refers to it.
 */
#include <linux/fs.h>
#include <linux/gfp.h>
#include <linux/kref.h>
#include <linux/log2.h>
#include <linux/io.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/version.h>

#include "vgpu_drv.h"

#ifdef MAX_PAGE_ORDER
#define VGPU_TOP_ORDER MAX_PAGE_ORDER
#else
#define VGPU_TOP_ORDER (MAX_ORDER - 1)
#endif

/**
 * struct vgpu_chunk - physically contiguous pages of a mapping.
 * @page:  first page (the chunk is split: each page has its own count).
 * @order: the chunk has 1 << @order pages.
 */
struct vgpu_chunk {
	struct page *page;
	unsigned int order;
};

/**
 * struct vgpu_mapping - memory behind one mmap() of /dev/vgpu.
 * @ref:       held by each VMA and each region that uses it.
 * @nr_pages:  size in pages.
 * @nr_chunks: entries of @chunks.
 * @chunks:    the memory, in mapping order.
 */
struct vgpu_mapping {
	struct kref ref;
	unsigned long nr_pages;
	unsigned long nr_chunks;
	struct vgpu_chunk chunks[];
};

static void vgpu_mapping_free_chunks(struct vgpu_mapping *m)
{
	unsigned long i, j;

	for (i = 0; i < m->nr_chunks; i++)
		for (j = 0; j < (1UL << m->chunks[i].order); j++)
			__free_page(m->chunks[i].page + j);
	kvfree(m);
}

static void vgpu_mapping_release(struct kref *ref)
{
	vgpu_mapping_free_chunks(container_of(ref, struct vgpu_mapping, ref));
}

/**
 * vgpu_mapping_put() - drop a reference to a mapping's memory.
 * @m: the mapping.
 *
 * Context: any that may free pages.
 */
void vgpu_mapping_put(struct vgpu_mapping *m)
{
	kref_put(&m->ref, vgpu_mapping_release);
}

static void vgpu_vm_open(struct vm_area_struct *vma)
{
	struct vgpu_mapping *m = vma->vm_private_data;

	kref_get(&m->ref);
}

static void vgpu_vm_close(struct vm_area_struct *vma)
{
	vgpu_mapping_put(vma->vm_private_data);
}

static const struct vm_operations_struct vgpu_vm_ops = {
	.open = vgpu_vm_open,
	.close = vgpu_vm_close,
};

/**
 * vgpu_vma_set_flags() - set VMA flags on any kernel version.
 * @vma: the mapping.
 * @f:   VM_* flags.
 */
void vgpu_vma_set_flags(struct vm_area_struct *vma, unsigned long f)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, f);
#else
	vma->vm_flags |= f;
#endif
}

/* Allocate @nr pages in chunks, the largest first. */
static struct vgpu_mapping *vgpu_mapping_alloc(unsigned long nr)
{
	struct vgpu_mapping *m;
	unsigned long done = 0;

	m = kvzalloc(struct_size(m, chunks, nr), GFP_KERNEL);
	if (!m)
		return NULL;
	kref_init(&m->ref);
	m->nr_pages = nr;

	while (done < nr) {
		unsigned int order = min_t(unsigned int, ilog2(nr - done),
					   VGPU_TOP_ORDER);
		struct page *page;

		for (;;) {
			gfp_t gfp = GFP_HIGHUSER | __GFP_ZERO | __GFP_NOWARN;

			if (order)
				gfp |= __GFP_NORETRY;
			page = alloc_pages(gfp, order);
			if (page || !order)
				break;
			order--;
		}
		if (!page)
			goto free_chunks;
		if (order)
			split_page(page, order);
		m->chunks[m->nr_chunks].page = page;
		m->chunks[m->nr_chunks].order = order;
		m->nr_chunks++;
		done += 1UL << order;
	}
	return m;

free_chunks:
	vgpu_mapping_free_chunks(m);
	return NULL;
}

/**
 * vgpu_mmap() - map new driver-allocated pinned memory.
 * @file: the open /dev/vgpu file.
 * @vma:  a MAP_SHARED mapping at offset 0 (VGPU_RING_MMAP_OFFSET: the
 *        file's rings, vgpu_ring.c).
 *
 * Context: process, mmap_lock held for writing.
 * Return: 0; -EINVAL (private mapping, non-zero offset); -E2BIG (larger than
 * max_pin_mb); -ENOMEM; an error from vm_insert_page().
 */
int vgpu_mmap(struct file *file, struct vm_area_struct *vma)
{
	unsigned long nr = vma_pages(vma), i, j, addr = vma->vm_start;
	struct vgpu_mapping *m;
	int err;

	if (vma->vm_pgoff == VGPU_RING_MMAP_OFFSET >> PAGE_SHIFT)
		return vgpu_ring_mmap(file->private_data, vma);
	if (!(vma->vm_flags & VM_SHARED) || vma->vm_pgoff)
		return -EINVAL;
	if (nr > ((u64)vgpu_max_pin_mb << (20 - PAGE_SHIFT)))
		return -E2BIG;

	m = vgpu_mapping_alloc(nr);
	if (!m)
		return -ENOMEM;

	vgpu_vma_set_flags(vma, VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
	for (i = 0; i < m->nr_chunks; i++) {
		for (j = 0; j < (1UL << m->chunks[i].order); j++) {
			err = vm_insert_page(vma, addr, m->chunks[i].page + j);
			if (err)
				goto free_mapping;
			addr += PAGE_SIZE;
		}
	}
	vma->vm_private_data = m;
	vma->vm_ops = &vgpu_vm_ops;
	return 0;

free_mapping:
	/* The caller unmaps what was inserted; those pages keep their own refs. */
	vgpu_mapping_put(m);
	return err;
}

/**
 * vgpu_mapping_lookup() - find the driver mapping that holds a user range.
 * @file:    the open /dev/vgpu file; only its own mappings count.
 * @addr:    first byte.
 * @len:     bytes.
 * @mapping: out: the mapping, with a reference taken.
 * @offset:  out: offset of @addr in the mapping.
 *
 * Context: process; takes mmap_lock for reading.
 * Return: 0; -ENOENT if the range is not inside one mapping of @file.
 */
int vgpu_mapping_lookup(struct file *file, u64 addr, u64 len,
			struct vgpu_mapping **mapping, u64 *offset)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	int err = -ENOENT;

	if (!mm)
		return -ENOENT;
	mmap_read_lock(mm);
	vma = vma_lookup(mm, addr);
	if (vma && vma->vm_ops == &vgpu_vm_ops && vma->vm_file == file &&
	    len <= vma->vm_end - addr) {
		*mapping = vma->vm_private_data;
		*offset = addr - vma->vm_start + (vma->vm_pgoff << PAGE_SHIFT);
		kref_get(&(*mapping)->ref);
		err = 0;
	}
	mmap_read_unlock(mm);
	return err;
}

/**
 * vgpu_mapping_segs() - append the segments of a range of a mapping.
 * @m:      the mapping.
 * @offset: first byte, from the start of the mapping.
 * @len:    bytes (inside the mapping).
 * @b:      the segment list; sealed first.
 *
 * Context: any.
 * Return: 0; -E2BIG when @b is full; -EINVAL if the range is outside @m.
 */
int vgpu_mapping_segs(struct vgpu_mapping *m, u64 offset, u64 len,
		      struct vgpu_seg_builder *b)
{
	u64 base = 0, size, skip, n;
	unsigned long i;
	int err;

	if (offset >= (u64)m->nr_pages << PAGE_SHIFT ||
	    len > ((u64)m->nr_pages << PAGE_SHIFT) - offset)
		return -EINVAL;
	vgpu_segs_seal(b);
	for (i = 0; i < m->nr_chunks && len; i++, base += size) {
		size = PAGE_SIZE << m->chunks[i].order;
		if (offset >= base + size)
			continue;
		skip = offset > base ? offset - base : 0;
		n = min(size - skip, len);
		err = vgpu_segs_add(b, page_to_phys(m->chunks[i].page) + skip, n);
		if (err)
			return err;
		len -= n;
	}
	return 0;
}
