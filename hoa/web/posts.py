"""The POST of a fenced operation's button: one service call, answered from the table."""

from django.http import HttpResponse
from django.shortcuts import redirect
from django.utils.decorators import method_decorator
from django.views import View

from hoa.answers import table as answer_table
from hoa.answers.refusals import Refusal
from hoa.security.audit import client_ip, limit_fenced_posts
from hoa.tenancy import OrganizationMixin


@method_decorator(limit_fenced_posts, name="dispatch")
class FencedPostView(OrganizationMixin, View):
    """``run(request, **url_kwargs)`` calls the operation's service once: its result answers
    303 to ``back_url`` with its message, a refusal its page (409, 400, 403, 503, 502; its
    way back ``back_url``), past the rate limit 429. ``run`` may return a page to answer
    first instead (a confirmation). A GET (a 409 page's address entered again) leads to
    ``back_url``. Subclasses set ``permission_required`` and ``operation`` too."""

    http_method_names = ["get", "head", "post"]

    def back_url(self, **kwargs) -> str:
        raise NotImplementedError

    def run(self, request, **kwargs):
        raise NotImplementedError

    def caller(self, request) -> dict:
        """Who asks, as every fenced service takes it: the association, the user, the
        address (``run``: ``service(..., **self.caller(request))``)."""
        return {"organization": self.organization, "actor": request.user, "ip": client_ip(request)}

    def get(self, request, *args, **kwargs):
        return redirect(self.back_url(**kwargs))

    def post(self, request, *args, **kwargs):
        back_url = self.back_url(**kwargs)
        try:
            result = self.run(request, **kwargs)
        except Refusal as exc:
            return answer_table.page(request, exc, extra_context={"back_url": back_url})
        if isinstance(result, HttpResponse):
            return result
        return answer_table.done(request, result, back_url)
