"""Insights parameters as Graph takes them: ``level``, ``fields``, breakdowns and time slicing.

Graph takes list-valued parameters as JSON arrays (``["action_type"]``) or comma lists,
checks every value against its enum and refuses an unknown one with error 100 naming its
position and the values it takes. The enums below are those of Meta's Python SDK 26.x
(``AdsInsights``). The sandbox computes only part of what Graph can break results down
by (:mod:`graph_sandbox.breakdowns`): a value Graph knows but the sandbox cannot compute
is refused with a message saying so (``docs/sandbox.md`` lists them), never silently
ignored.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from graph_sandbox.breakdowns import NO_BREAKDOWNS, Breakdowns
from graph_sandbox.errors import invalid_param
from graph_sandbox.periods import Period, time_range_value
from graph_sandbox.query import parse_json_list, parse_list_param

#: The levels the sandbox computes rows for.
LEVELS = ("account", "campaign", "adset", "ad")
#: Every level Graph takes, in the order its error message lists them.
GRAPH_LEVELS = ("delivery_ad", "politicalad", "ad", "adset", "campaign", "account")

ACTION_BREAKDOWNS = (
    "action_canvas_component_name",
    "action_carousel_card_id",
    "action_carousel_card_name",
    "action_destination",
    "action_device",
    "action_reaction",
    "action_target_id",
    "action_type",
    "action_video_sound",
    "action_video_type",
    "conversion_destination",
    "is_business_ai_assisted",
    "matched_persona_id",
    "matched_persona_name",
    "signal_source_bucket",
    "standard_event_content_type",
)

BREAKDOWNS = (
    "ad_extension_domain",
    "ad_extension_url",
    "ad_format_asset",
    "affiliate_click_region",
    "affiliate_link_url",
    "age",
    "app_id",
    "body_asset",
    "breakdown_ad_objective",
    "breakdown_reporting_ad_id",
    "call_to_action_asset",
    "coarse_conversion_value",
    "comscore_market",
    "conversion_destination",
    "country",
    "creative_automation_asset_id",
    "creative_fingerprint_details",
    "creative_format_classification",
    "creative_media_type_breakdown",
    "creative_relaxation_asset_type",
    "crm_advertiser_l12_territory_ids",
    "crm_advertiser_subvertical_id",
    "crm_advertiser_vertical_id",
    "crm_ult_advertiser_id",
    "description_asset",
    "device_platform",
    "dma",
    "existing_post_id",
    "fidelity_type",
    "flexible_format_asset_type",
    "frequency_value",
    "gen_ai_asset_type",
    "gender",
    "hourly_stats_aggregated_by_advertiser_time_zone",
    "hourly_stats_aggregated_by_audience_time_zone",
    "hsid",
    "image_asset",
    "impression_device",
    "impression_view_time_advertiser_hour_v2",
    "instagram_ads_follow_type",
    "instagram_ads_instagram_media_product_type",
    "instagram_ads_time_since_creation_bucket",
    "internal_campaign_id",
    "is_auto_advance",
    "is_conversion_id_modeled",
    "is_rendered_as_delayed_skip_ad",
    "landing_destination",
    "link_url_asset",
    "marketing_messages_btn_name",
    "mdsa_landing_destination",
    "media_asset_url",
    "media_creator",
    "media_destination_url",
    "media_format",
    "media_id",
    "media_origin_url",
    "media_text_content",
    "media_type",
    "mmm",
    "msa_seller_name",
    "overlap_segment",
    "pa_creator_ig_handle",
    "place_page_id",
    "placement_path",
    "platform_position",
    "postback_sequence_index",
    "product_brand_breakdown",
    "product_category_breakdown",
    "product_custom_label_0_breakdown",
    "product_custom_label_1_breakdown",
    "product_custom_label_2_breakdown",
    "product_custom_label_3_breakdown",
    "product_custom_label_4_breakdown",
    "product_group_content_id_breakdown",
    "product_id",
    "publisher_platform",
    "redownload",
    "reels_trending_topic",
    "region",
    "rta_ugc_topic",
    "rule_set_id",
    "rule_set_name",
    "signal_source",
    "signal_source_bucket",
    "skan_campaign_id",
    "skan_conversion_id",
    "skan_version",
    "sot_attribution_model_type",
    "sot_attribution_window",
    "sot_channel",
    "sot_event_type",
    "sot_source",
    "standard_event_content_type",
    "title_asset",
    "user_persona_id",
    "user_persona_name",
    "video_asset",
    "zip",
)

ACTION_ATTRIBUTION_WINDOWS = (
    "1d_click",
    "1d_ev",
    "1d_sequenced",
    "1d_view",
    "28d_click",
    "28d_sequenced",
    "28d_view",
    "28d_view_all_conversions",
    "28d_view_first_conversion",
    "7d_click",
    "7d_sequenced",
    "7d_view",
    "7d_view_all_conversions",
    "7d_view_first_conversion",
    "custom",
    "dda",
    "default",
    "incrementality",
    "incrementality_all_conversions",
    "incrementality_first_conversion",
    "skan_click",
    "skan_click_second_postback",
    "skan_click_third_postback",
    "skan_view",
    "skan_view_second_postback",
    "skan_view_third_postback",
)
ACTION_REPORT_TIMES = ("conversion", "impression", "lifetime", "mixed")

#: ``time_increment`` as a number of days: 1 to 90.
MAX_TIME_INCREMENT_DAYS = 90
_INCREMENT_WORDS = ("monthly", "all_days")


@dataclass(frozen=True)
class Slicing:
    """How an Insights request cuts its results beyond ``level``.

    Attributes:
        periods: One result set per period: the ``time_ranges``, or the request's period
            cut by ``time_increment`` (a single period for ``all_days``).
        breakdowns: The hourly breakdown, or the placement or people cells, of each row.
    """

    periods: tuple[Period, ...]
    breakdowns: Breakdowns = NO_BREAKDOWNS


def enum_values(raw: str | None, name: str, allowed: Sequence[str]) -> list[str]:
    """A list-valued enum parameter, every value checked.

    Raises:
        GraphError: 100 ``"<name>[i] must be one of the following values: …"``, as Graph words it.
    """
    values = parse_list_param(raw, name)
    for index, value in enumerate(values):
        if value not in allowed:
            raise invalid_param(
                f"{name}[{index}] must be one of the following values: {', '.join(allowed)}"
            )
    return values


def parse_level(raw: str | None, default: str) -> str:
    """``level``; Graph's levels beyond those the sandbox has are refused as unsupported.

    Raises:
        GraphError: 100 for a value Graph does not know (Graph's message) or one the
            sandbox cannot compute (``delivery_ad``, ``politicalad``).
    """
    level = raw or default
    if level not in GRAPH_LEVELS:
        raise invalid_param(f"Param level must be one of {{{', '.join(GRAPH_LEVELS)}}}")
    if level not in LEVELS:
        raise invalid_param(
            f"level {level} is not supported by the sandbox; use one of {', '.join(LEVELS)}"
        )
    return level


def parse_insights_fields(
    raw: str | None, *, default: Sequence[str], allowed: Collection[str]
) -> list[str]:
    """``fields`` of an Insights request, a JSON array or a comma list.

    Raises:
        GraphError: 100 naming every field Insights does not have, as Graph words it.
    """
    fields = parse_list_param(raw, "fields")
    if not fields:
        return list(default)
    unknown = [name for name in dict.fromkeys(fields) if name not in allowed]
    if unknown:
        verb = "is" if len(unknown) == 1 else "are"
        raise invalid_param(
            f"{', '.join(unknown)} {verb} not valid for fields param. please check "
            "https://developers.facebook.com/docs/marketing-api/reference/ads-insights/ "
            "for all valid values"
        )
    return list(dict.fromkeys(fields))


def check_action_breakdowns(raw: str | None) -> list[str]:
    """``action_breakdowns``: Graph's values; the sandbox breaks actions down by type only.

    Raises:
        GraphError: 100 for an unknown value or one the sandbox cannot compute.
    """
    values = enum_values(raw, "action_breakdowns", ACTION_BREAKDOWNS)
    unsupported = [value for value in values if value != "action_type"]
    if unsupported:
        raise invalid_param(
            f"action_breakdowns {unsupported[0]} is not supported by the sandbox; "
            "it breaks actions down by action_type only"
        )
    return values


def check_reporting_options(attribution_windows: str | None, report_time: str | None) -> None:
    """``action_attribution_windows`` and ``action_report_time``: checked, then not applied.

    Raises:
        GraphError: 100 for a value Graph does not know.
    """
    enum_values(attribution_windows, "action_attribution_windows", ACTION_ATTRIBUTION_WINDOWS)
    if report_time and report_time not in ACTION_REPORT_TIMES:
        raise invalid_param(
            f"Param action_report_time must be one of {{{', '.join(ACTION_REPORT_TIMES)}}}"
        )


def parse_time_increment(raw: str | None) -> int | str:
    """``time_increment``: ``all_days`` (the default), ``monthly`` or a number of days, 1 to 90.

    Raises:
        GraphError: 100 for anything else.
    """
    if raw is None or raw == "":
        return "all_days"
    if raw in _INCREMENT_WORDS:
        return raw
    if raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_TIME_INCREMENT_DAYS:
        return int(raw)
    raise invalid_param(
        f"time_increment must be a number of days from 1 to {MAX_TIME_INCREMENT_DAYS}, "
        "monthly or all_days"
    )


def parse_time_ranges(raw: str | None) -> tuple[Period, ...]:
    """``time_ranges``: a JSON array of ``{"since", "until"}`` objects; absent → ``()``.

    Raises:
        GraphError: 100 when it is not such an array or a date is malformed.
    """
    return tuple(
        time_range_value(item, f"time_ranges[{index}]")
        for index, item in enumerate(parse_json_list(raw, "time_ranges"))
    )


def slices(period: Period, increment: int | str) -> tuple[Period, ...]:
    """``period`` cut by ``time_increment``: whole, by calendar month, or every N days.

    The last slice ends with the period, so it may be shorter than the others.
    """
    since, until = period
    if increment == "all_days":
        return (period,)
    out: list[Period] = []
    start = since
    while start <= until:
        if increment == "monthly":
            end = _month_end(start)
        else:
            assert isinstance(increment, int)
            end = start + timedelta(days=increment - 1)
        out.append((start, min(end, until)))
        start = min(end, until) + timedelta(days=1)
    return tuple(out)


def _month_end(day: date) -> date:
    first_of_next = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
    return first_of_next - timedelta(days=1)


def hour_label(hour: int) -> str:
    """The value of an hourly breakdown, e.g. ``"07:00:00 - 07:59:59"``."""
    return f"{hour:02d}:00:00 - {hour:02d}:59:59"
