"""Template context every page gets."""

from hoa.operations import operations


def operation_links(request) -> dict:
    """The fenced operations' entries of an organization's navigation (``base.html``)."""
    links = [link for operation in operations() for link in operation.links]
    return {"operation_links": sorted(links, key=lambda link: link.order)}
